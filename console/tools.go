package console

import "net/http"

func (c *Console) toolsRoutes(mux *http.ServeMux) {}
