package console

import "net/http"

func (c *Console) mqttRoutes(mux *http.ServeMux) {}
