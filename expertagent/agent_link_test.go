package expertagent

import "testing"

func TestAgentBrokerURLDefaultPort(t *testing.T) {
	for in, want := range map[string]string{
		"tcp://broker":          "tcp://broker:1883",
		"mqtt://10.0.0.1":       "mqtt://10.0.0.1:1883",
		"ssl://broker":          "ssl://broker:8883",
		"mqtts://[::1]":         "mqtts://[::1]:8883",
		"tcp://broker:1884":     "tcp://broker:1884",
		"ws://broker/mqtt":      "ws://broker/mqtt",
		"unix:///run/mqtt.sock": "unix:///run/mqtt.sock",
		"::not a url":           "::not a url",
	} {
		if got := agentBrokerURL(in); got != want {
			t.Errorf("agentBrokerURL(%q) = %q, want %q", in, got, want)
		}
	}
}
