package server

import (
	_ "embed"
	"net/http"
	"strconv"
)

// OpenAPI is the OpenAPI 3.1 description of the service, served at
// GET /openapi.yaml. The repository keeps a copy at api/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

// openAPI serves GET and HEAD /openapi.yaml.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Length", strconv.Itoa(len(OpenAPI)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(OpenAPI)
	}
}
