package httpapi

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
)

// FuzzStorableJSON holds storableJSON to PostgreSQL itself: for any valid JSON, the check
// refuses it exactly when the database's jsonb refuses it. A check that refused less would let a
// payload reach a 500; one that refused more would turn away what the ledger could store.
func FuzzStorableJSON(f *testing.F) {
	for _, seed := range []string{`{}`, `{"n":1}`, `{"n":1e999999}`, `{"n":1e-20000}`, `{"n":0e-16384}`, `{"n":0e99999999999}`,
		`{"n":1e131071}`, `{"n":1e131072}`, `{"n":-0.5E-16382}`, `{"n":12.34e-16381}`, `{"s":"\u0000"}`, `{"s":"\ud800"}`,
		`{"s":"\udc00"}`, `{"s":"\ud800\udc00"}`, `{"s":"\\u0000"}`, `[1e5,"1e999999",{"k":2E+3}]`, `"\u00e9"`,
		`{"n":0.` + strings.Repeat("0", 16382) + `1}`, `{"n":1` + strings.Repeat("0", 200) + `}`} {
		f.Add(seed)
	}
	pool := pgtest.New(f).Pool
	f.Fuzz(func(t *testing.T, doc string) {
		if !json.Valid([]byte(doc)) {
			return
		}
		ours := storableJSON([]byte(doc))
		var out string
		theirs := pool.QueryRow(context.Background(), `SELECT $1::text::jsonb::text`, doc).Scan(&out)
		if (ours == nil) != (theirs == nil) {
			t.Fatalf("%.200q: storableJSON says %v, PostgreSQL says %v", doc, ours, theirs)
		}
	})
}

func TestStorableNumberMatchesPostgreSQL(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t).Pool
	for _, lit := range []string{"0", "-0", "1", "1e131071", "1e131072", "9.99e131071", "99e131070", "0.1e131072",
		"1e-16383", "1e-16384", "1.5e-16382", "1.5e-16383", "0e-16383", "0e-16384", "0e999999", "-1.0e+131071",
		"0.000001e131077", "100e-16385", "1E+5", "123456789.123456789e-16374"} {
		ours := storableNumber(lit)
		var out string
		theirs := pool.QueryRow(context.Background(), `SELECT $1::text::jsonb::text`, lit).Scan(&out)
		if (ours == nil) != (theirs == nil) {
			t.Errorf("%s: storableNumber says %v, PostgreSQL says %v", lit, ours, theirs)
		}
	}
}
