package console

import (
	"fmt"
	"net/url"
	"testing"
)

// TestToolsPaginate: the Tools page shows toolsPageSize rows a page, the
// filter matches a tool's name or its agent in any case, and only the
// rows shown get their schema indented.
func TestToolsPaginate(t *testing.T) {
	rows := func() []toolsRow {
		var out []toolsRow
		for i := range 450 {
			out = append(out, toolsRow{Name: fmt.Sprintf("tool%03d", i), Agent: fmt.Sprintf("agent%d", i%3), InputSchema: []byte(`{"type":"object"}`)})
		}
		return out
	}
	for _, tc := range []struct {
		query                       string
		first                       string
		shown, total, prev, next, p int
	}{
		{"", "tool000", 200, 450, 0, 2, 1},
		{"page=3", "tool400", 50, 450, 2, 0, 3},
		{"page=99", "tool400", 50, 450, 2, 0, 3},
		{"page=-1", "tool000", 200, 450, 0, 2, 1},
		{"q=AGENT2", "tool002", 150, 150, 0, 0, 1},
		{"q=tool44", "tool440", 10, 10, 0, 0, 1},
		{"q=nothing", "", 0, 0, 0, 0, 1},
	} {
		t.Run(tc.query, func(t *testing.T) {
			d := toolsData{Visible: rows(), Hidden: []toolsHidden{{Name: "tool999", Source: "agent9"}}}
			q, _ := url.ParseQuery(tc.query)
			d.paginate(q)
			if len(d.Visible) != tc.shown || d.VisibleTotal != tc.total || d.PrevPage != tc.prev || d.NextPage != tc.next || d.Page != tc.p {
				t.Fatalf("shown %d of %d, page %d (prev %d, next %d)", len(d.Visible), d.VisibleTotal, d.Page, d.PrevPage, d.NextPage)
			}
			if tc.shown > 0 && (d.Visible[0].Name != tc.first || d.Visible[0].Schema == "") {
				t.Fatalf("first row %+v", d.Visible[0])
			}
		})
	}
}
