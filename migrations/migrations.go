// Package migrations embeds the numbered SQL migrations of the ledger's schema. Each version has
// an up file (NNNN_name.up.sql) and a down file (NNNN_name.down.sql); `ledger migrate` applies
// them in order and records each in the schema_migrations table.
package migrations

import "embed"

// FS holds the migration files.
//
//go:embed *.sql
var FS embed.FS
