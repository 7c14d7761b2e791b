package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Collection is several reports of one benchmark run (the phases of
// scripts/bench.sh: each needs a gateway configured its own way), kept
// apart: each report's ratios are against its own baseline.
type Collection struct {
	Started time.Time `json:"started"`
	// Command is how the run was started, for the record.
	Command string    `json:"command,omitempty"`
	Machine Machine   `json:"machine"`
	Reports []*Report `json:"reports"`
}

// ErrNoReports is returned by ReadReports for a directory without any.
var ErrNoReports = errors.New("bench: no bench-*.json report found")

// ReadReports reads every bench-*.json report under dir (recursively), in
// path order: name the phase directories so that they sort in run order.
func ReadReports(dir string) ([]*Report, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasPrefix(d.Name(), "bench-") && strings.HasSuffix(d.Name(), ".json") &&
			!strings.HasPrefix(d.Name(), "bench-all-") {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: read reports: %w", err)
	}
	slices.Sort(paths)
	var reps []*Report
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("bench: read reports: %w", err)
		}
		var rep Report
		if err := json.Unmarshal(data, &rep); err != nil {
			return nil, fmt.Errorf("bench: report %s: %w", p, err)
		}
		reps = append(reps, &rep)
	}
	if len(reps) == 0 {
		return nil, fmt.Errorf("%w under %s", ErrNoReports, dir)
	}
	return reps, nil
}

// NewCollection gathers reports; its start and machine are the first
// report's.
func NewCollection(command string, reports []*Report) *Collection {
	c := &Collection{Command: command, Reports: reports}
	if len(reports) > 0 {
		c.Started, c.Machine = reports[0].Started, reports[0].Machine
	}
	return c
}

// WriteTable prints every report's table, one after another.
func (c *Collection) WriteTable(w io.Writer) error {
	for i, rep := range c.Reports {
		if i > 0 {
			if _, err := fmt.Fprintln(w); err != nil {
				return err
			}
		}
		if err := rep.WriteTable(w); err != nil {
			return err
		}
	}
	return nil
}

// Failed reports whether any report had a failed scenario or call.
func (c *Collection) Failed() bool {
	return slices.ContainsFunc(c.Reports, (*Report).Failed)
}

// WriteFiles writes dir/bench-all-<time>.json and the chart beside it
// (.svg), creating dir, and returns both paths.
func (c *Collection) WriteFiles(dir string) (jsonPath, svgPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("bench: results dir: %w", err)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", "", fmt.Errorf("bench: encode collection: %w", err)
	}
	base := filepath.Join(dir, "bench-all-"+c.Started.Format("20060102T150405Z"))
	if err := os.WriteFile(base+".json", append(data, '\n'), 0o644); err != nil {
		return "", "", fmt.Errorf("bench: write collection: %w", err)
	}
	if err := WriteSVGFile(base+".svg", c.Reports); err != nil {
		return "", "", err
	}
	return base + ".json", base + ".svg", nil
}
