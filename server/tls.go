package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
)

// checkTLS validates the HTTPS settings: both files or neither.
func checkTLS(cfg *Config) error {
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return errors.New("server: HTTPS needs both a certificate file and a key file")
	}
	return nil
}

// https reports whether the gateway serves HTTPS.
func (s *Server) https() bool { return s.cfg.TLSCertFile != "" }

// loadCert reads the certificate and key files and, when they make a pair,
// serves that certificate from the next TLS handshake on; otherwise the
// one served so far stays, and the error says why.
func (s *Server) loadCert() error {
	cert, err := tls.LoadX509KeyPair(s.cfg.TLSCertFile, s.cfg.TLSKeyFile)
	if err != nil {
		return fmt.Errorf("tls certificate: %w", err)
	}
	s.cert.Store(&cert)
	return nil
}

// tlsListener serves ln with TLS, the certificate loadCert read last.
// HTTP/1.1 only, as without TLS: the gateway's MCP path is built on it.
func (s *Server) tlsListener(ln net.Listener) net.Listener {
	return tls.NewListener(ln, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cert.Load(), nil
		},
	})
}
