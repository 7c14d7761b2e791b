package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// callCold makes one call in a session of its own: initialize and
// notifications/initialized, the call (timed alone, as every other call),
// then DELETE. w.cycle records the whole cycle. The worker's session and
// raw head are replaced for the call; its connection stays. A cycle whose
// DELETE fails counts as one failed call.
func (w *worker) callCold(ctx context.Context) {
	start := time.Now()
	s, err := w.c.openSession(ctx)
	if err != nil {
		w.errs.add(fmt.Errorf("cold session: %w", err))
		return
	}
	w.s, w.rawHead = s, s.rawHead
	w.hold, w.held = true, -1
	w.callOn(ctx, "")
	w.hold = false
	if err := w.c.deleteSession(ctx, s); err != nil {
		if w.held >= 0 { // the call's own failure is counted already
			w.errs.add(fmt.Errorf("cold session: %w", err))
		}
		return
	}
	if w.held >= 0 {
		w.hist.record(w.held)
		w.cycle.record(time.Since(start))
	}
}

// ok records a successful call; while w.hold is set (a cold cycle that has
// yet to end), it is kept in w.held instead.
func (w *worker) ok(lat time.Duration) {
	if w.hold {
		w.held = lat
		return
	}
	w.hist.record(lat)
}

// checkList checks the response of a tools/list: a result whose tools array
// holds at least minTools entries.
func checkList(r *rpcResponse, minTools int) error {
	if r.Error != nil {
		return fmt.Errorf("%w %d: %s", ErrRPC, r.Error.Code, r.Error.Message)
	}
	var res struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(r.Result, &res); err != nil {
		return fmt.Errorf("%w: result: %v", ErrBadResponse, err)
	}
	if res.Tools == nil {
		return fmt.Errorf("%w: no tools array in %.200s", ErrBadResponse, r.Result)
	}
	if len(res.Tools) < minTools {
		return fmt.Errorf("%w: %d tools listed, want at least %d", ErrWrongResult, len(res.Tools), minTools)
	}
	return nil
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand panics rather)
	return hex.EncodeToString(b)
}
