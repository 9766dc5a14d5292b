package provider

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
)

// providerName is what a provider's name may be: it is a metric label, part of the receipts'
// URL path, and shown in the history.
var providerName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// CheckName checks a provider's name (Config.Provider of every adapter); example is a name of
// the adapter's kind, said when the name is missing.
func CheckName(name, example string) error {
	switch {
	case name == "":
		return fmt.Errorf("provider is required (the provider's name in the history and metrics, e.g. %s)", example)
	case !providerName.MatchString(name):
		return fmt.Errorf("provider %q: want lowercase letters, digits, - or _, starting with a letter, at most 32 characters", name)
	}
	return nil
}

// CheckBaseURL checks the base URL of a fixed API, which the adapter appends its paths to,
// without repeating it (an operator may have pasted a credential into it, and configuration
// errors end up in logs). credentials says where the credentials go instead of the URL's user
// part ("account_sid and auth_token_env"); "" says nothing more.
func CheckBaseURL(raw, credentials string) error {
	u, err := checkURL(raw, credentials)
	switch {
	case err != nil:
		return err
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return errors.New("must not have a query or fragment: the API path is appended to it")
	}
	return nil
}

// CheckCallbackURL checks a URL the provider calls back (a status callback), without repeating
// it: an absolute http or https URL with a host, no user part, no fragment; its query is the
// ledger's to set.
func CheckCallbackURL(raw string) error {
	u, err := checkURL(raw, "")
	if err == nil && u.Fragment != "" {
		return errors.New("must not have a fragment")
	}
	return err
}

// checkURL is what every URL of a provider must be: absolute http or https, with a host and a
// port when it has a colon, and without a user part.
func checkURL(raw, credentials string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("not a URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("must be an absolute http or https URL")
	case u.Host == "" || u.Hostname() == "":
		return nil, errors.New("must name a host")
	case u.User != nil && credentials != "":
		return nil, fmt.Errorf("must not carry a user name or password: the credentials go in %s", credentials)
	case u.User != nil:
		return nil, errors.New("must not carry a user name or password")
	case u.Port() == "" && u.Host[len(u.Host)-1] == ':':
		return nil, errors.New("has an empty port")
	}
	return u, nil
}

// CheckAPI checks the two settings every provider of a fixed API has: its name (example is one
// of the adapter's kind) and its base URL, "" for the API's default, by check (CheckBaseURL with
// the adapter's own words, and what else the adapter refuses in it). Each problem is blamed on
// its key: the start of a Validate's list.
func CheckAPI(name, example, baseURL string, check func(string) error) []error {
	var problems []error
	if err := CheckName(name, example); err != nil {
		problems = append(problems, err)
	}
	if baseURL != "" {
		if err := check(baseURL); err != nil {
			problems = append(problems, Errorf("base_url", "base_url: %w", err))
		}
	}
	return problems
}
