package console

import "net/http"

func (c *Console) accessRoutes(mux *http.ServeMux) {}
