// Package docs holds what the ledger serves of its documentation: the OpenAPI description of the
// HTTP API, built into the binary so the server answers with the contract it was built against.
package docs

import _ "embed"

// OpenAPI is docs/openapi.yaml, the OpenAPI 3.1 description of every route of the HTTP API
// (served at GET /openapi.yaml, and checked against every answer of the HTTP test suites by
// adapters/httpapi/openapitest). Read it; do not modify it.
//
//go:embed openapi.yaml
var OpenAPI []byte
