package console

import "net/http"

func (c *Console) settingsRoutes(mux *http.ServeMux) {}
