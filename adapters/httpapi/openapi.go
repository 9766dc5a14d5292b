package httpapi

import (
	"net/http"
	"strconv"

	"github.com/deliveryledger/ledger/docs"
)

// OpenAPIHandler answers GET /openapi.yaml with the OpenAPI description of this API
// (docs/openapi.yaml, built in), for clients and tools to read the contract from the server they
// talk to. It needs no key: the document holds no tenant's data.
func OpenAPIHandler() http.Handler {
	length := strconv.Itoa(len(docs.OpenAPI))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Header().Set("Content-Length", length)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(docs.OpenAPI)
		}
	})
}
