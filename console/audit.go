package console

import "net/http"

func (c *Console) auditRoutes(mux *http.ServeMux) {}
