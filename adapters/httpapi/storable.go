package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// What PostgreSQL refuses, caught before it is sent. A request whose values the database would
// refuse is the caller's to fix (400 naming the value), not a server error: this file is the one
// place that knows which values those are, and every handler goes through it, for bodies
// (decodeJSON checks every string and JSON member it decoded), query parameters (checkQuery,
// which every route calls through withQuery), path values (pathID for ids, storableText for the
// Idempotency-Key of GET /v1/requests/{key}) and headers.
//
//   - text: PostgreSQL's text cannot hold NUL (22P05, "unsupported Unicode escape sequence" in
//     jsonb; a NUL byte in a text parameter) and must be valid UTF-8 (22021);
//   - numbers in jsonb are PostgreSQL numerics: at most 131072 digits before the decimal point
//     and 16383 after it, exponent included (22003, "value overflows numeric format");
//   - uuids: uuid.Parse takes forms PostgreSQL does not ("urn:uuid:..."; 22P02), so ids are
//     parsed and sent in their canonical form.

// Numeric bounds of PostgreSQL (src/backend/utils/adt/numeric.c): NUMERIC_WEIGHT_MAX base-10000
// digits before the point, NUMERIC_DSCALE_MAX decimal digits after it.
const (
	maxNumericIntDigits  = (0x7FFF + 1) * 4 // 131072
	maxNumericFracDigits = 0x3FFF           // 16383
	maxNumericExponent   = 1<<31/2 - 1      // INT_MAX / 2
)

// storableText refuses a string PostgreSQL's text would not take.
func storableText(s string) error {
	switch {
	case !utf8.ValidString(s):
		return errors.New("must be valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return errors.New("must not contain the character NUL (U+0000)")
	}
	return nil
}

// storableNumber refuses a JSON number (its literal text) that a PostgreSQL numeric cannot hold.
func storableNumber(lit string) error {
	mantissa, exp := lit, 0
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		e, err := strconv.Atoi(lit[i+1:])
		// PostgreSQL refuses an exponent beyond ±(INT_MAX/2) whatever the digits, zero's too.
		if err != nil || e >= maxNumericExponent || e <= -maxNumericExponent {
			return fmt.Errorf("number %.40s has an exponent out of range", lit)
		}
		mantissa, exp = lit[:i], e
	}
	mantissa = strings.TrimPrefix(mantissa, "-")
	intPart, fracPart, _ := strings.Cut(mantissa, ".")
	// Scale: the decimal digits after the point once the exponent is applied; PostgreSQL counts
	// them even for zero.
	if scale := len(fracPart) - exp; scale > maxNumericFracDigits {
		return fmt.Errorf("number %.40s has more than %d digits after the decimal point", lit, maxNumericFracDigits)
	}
	digits := strings.TrimLeft(intPart+fracPart, "0")
	if digits == "" {
		return nil // zero: no weight to bound
	}
	// The power of ten of the first significant digit.
	lead := len(intPart) - 1 - (len(intPart+fracPart) - len(digits)) + exp
	if lead >= maxNumericIntDigits {
		return fmt.Errorf("number %.40s has more than %d digits before the decimal point", lit, maxNumericIntDigits)
	}
	return nil
}

// storableJSON refuses valid JSON that PostgreSQL's jsonb cannot store, so such a payload is a
// 400 naming it rather than a 500 at commit: invalid UTF-8, the escape \u0000, UTF-16
// surrogate escapes that do not form a pair, and numbers a numeric cannot hold.
func storableJSON(p []byte) error {
	if !utf8.Valid(p) {
		return errors.New("must be valid UTF-8")
	}
	inString := false
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '"':
			inString = !inString
		case !inString && (c == '-' || c >= '0' && c <= '9'):
			end := i + 1
			for end < len(p) && strings.IndexByte("0123456789.eE+-", p[end]) >= 0 {
				end++
			}
			// A short literal without an exponent cannot leave a numeric's range.
			if lit := p[i:end]; len(lit) > 64 || bytes.ContainsAny(lit, "eE") {
				if err := storableNumber(string(lit)); err != nil {
					return err
				}
			}
			i = end - 1
		case c == '\\' && inString && i+1 < len(p):
			if p[i+1] != 'u' || i+5 >= len(p) {
				i++ // an escaped character: skip it, it cannot end the string
				continue
			}
			r, err := strconv.ParseUint(string(p[i+2:i+6]), 16, 32)
			if err != nil {
				return errors.New("has a malformed \\u escape")
			}
			switch {
			case r == 0:
				return errors.New("must not contain the character \\u0000")
			case r >= 0xDC00 && r <= 0xDFFF:
				return errors.New("has a low surrogate escape without a high one before it")
			case r >= 0xD800 && r <= 0xDBFF:
				next := p[i+6:]
				if len(next) < 6 || next[0] != '\\' || next[1] != 'u' {
					return errors.New("has a high surrogate escape without a low one after it")
				}
				low, err := strconv.ParseUint(string(next[2:6]), 16, 32)
				if err != nil || low < 0xDC00 || low > 0xDFFF {
					return errors.New("has a high surrogate escape without a low one after it")
				}
				i += 6
			}
			i += 5
		}
	}
	return nil
}

// pathID returns the canonical form of a delivery id in a path, or false for anything that is
// not a UUID: such an id names no delivery (404), whatever its spelling.
func pathID(s string) (string, bool) {
	id, err := uuid.Parse(s)
	if err != nil {
		return "", false
	}
	return id.String(), true
}

// checkStrings walks a decoded request body and refuses the first string that storableText
// refuses, naming it by its JSON path ("recipients[2].recipient"). Raw JSON members are left to
// storableJSON, which the handlers call on them.
func checkStrings(v any) error {
	return walkStrings(reflect.ValueOf(v), "")
}

func walkStrings(v reflect.Value, path string) error {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return walkStrings(v.Elem(), path)
	case reflect.String:
		if err := storableText(v.String()); err != nil {
			return invalid(path, "%v", err)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil // json.RawMessage: checked as JSON
		}
		for i := range v.Len() {
			if err := walkStrings(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if path != "" {
				name = path + "." + name
			}
			if err := walkStrings(v.Field(i), name); err != nil {
				return err
			}
		}
	}
	return nil
}
