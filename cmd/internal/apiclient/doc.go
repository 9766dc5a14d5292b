// Package apiclient is the Go client oapi-codegen generates from docs/openapi.yaml, kept here to
// prove the description usable by generated clients: its test drives a live ledger through it
// (accept, read, history) and switches on each event's type, which only a discriminated event
// union allows. client.gen.go is generated; change docs/openapi.yaml and run
// scripts/openapi.sh generate (make lint fails while the two disagree). Nothing in the ledger
// imports this package.
package apiclient

//go:generate ../../../scripts/openapi.sh generate
