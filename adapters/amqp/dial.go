package amqp

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Addresses splits a broker URL setting into its addresses: one URL, or several separated by
// commas (the nodes of a cluster: amqp://u:p@127.0.0.1:5681/,amqp://u:p@127.0.0.1:5682/).
func Addresses(urls string) []string {
	var out []string
	for _, u := range strings.Split(urls, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// ValidateURLs checks every address of a broker URL setting.
func ValidateURLs(urls string) error {
	addrs := Addresses(urls)
	if len(addrs) == 0 {
		return errors.New("amqp url is empty")
	}
	var errs []error
	for _, a := range addrs {
		if _, err := amqp091.ParseURI(a); err != nil {
			errs = append(errs, fmt.Errorf("amqp url %q: %w", redact(a), err))
		}
	}
	return errors.Join(errs...)
}

// redact drops the password of a broker URL for an error message.
func redact(u string) string {
	if uri, err := amqp091.ParseURI(u); err == nil && uri.Password != "" {
		return strings.Replace(u, ":"+uri.Password+"@", ":***@", 1)
	}
	return u
}

// next spreads connections over a cluster's nodes: each Dial starts one address further on.
var next atomic.Uint32

// Dial connects to the first address of urls that answers, starting each time at the address
// after the one the previous Dial started at, so that the processes that lost a node spread over
// the others rather than all taking the first.
func Dial(urls string) (*amqp091.Connection, error) {
	return DialConfig(urls, amqp091.Config{})
}

// DialConfig is Dial with a configuration (a dial timeout, say).
func DialConfig(urls string, cfg amqp091.Config) (*amqp091.Connection, error) {
	addrs := Addresses(urls)
	if len(addrs) == 0 {
		return nil, errors.New("amqp url is empty")
	}
	start := int(next.Add(1)) % len(addrs)
	var errs []error
	for i := range addrs {
		a := addrs[(start+i)%len(addrs)]
		conn, err := amqp091.DialConfig(a, withDefaults(cfg))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// withDefaults fills what amqp091.Dial sets and DialConfig does not.
func withDefaults(cfg amqp091.Config) amqp091.Config {
	if cfg.Locale == "" {
		cfg.Locale = "en_US"
	}
	return cfg
}
