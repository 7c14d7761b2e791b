package expertagent

// UsePahoLink makes a connect through paho even to a tcp:// or ssl://
// broker, which the lean client serves otherwise: tests and benchmarks
// compare the two links. Call it before Run.
func UsePahoLink(a *Agent) { a.usePaho = true }
