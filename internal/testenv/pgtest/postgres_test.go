package pgtest

import (
	"database/sql"
	"testing"
)

func TestStart(t *testing.T) {
	p := Start(t)
	u := p.CreateDatabase(t, `CREATE TABLE x (v BIGINT)`, `INSERT INTO x VALUES (42)`)
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int64
	if err := db.QueryRowContext(t.Context(), `SELECT v FROM x`).Scan(&v); err != nil || v != 42 {
		t.Fatalf("SELECT = %d, %v; want 42", v, err)
	}
	if u2 := p.CreateDatabase(t); u2 == u {
		t.Fatalf("CreateDatabase twice gave %s", u)
	}
}
