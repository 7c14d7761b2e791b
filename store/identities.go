package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"
	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/contract"
)

// AddIdentity stores a new MQTT identity with a hash of password. The
// username must pass contract.ValidateLevel: it appears in client IDs and topics. An
// existing username gives ErrExists.
func (s *Store) AddIdentity(ctx context.Context, username string, role acl.Role, password []byte) (_ acl.Identity, err error) {
	defer mapWriteErr(&err)
	if err := contract.ValidateLevel(username); err != nil {
		return acl.Identity{}, fmt.Errorf("username: %w", err)
	}
	if _, err := acl.ParseRole(string(role)); err != nil {
		return acl.Identity{}, err
	}
	hash, bhash, err := s.hashNew(ctx, password)
	if err != nil {
		return acl.Identity{}, fmt.Errorf("identity %s: %w", username, err)
	}
	created, ms := now()
	res, err := s.db.ExecContext(ctx, qInsertIdentity, username, string(role), hash, ms, bhash)
	if err != nil {
		return acl.Identity{}, fmt.Errorf("add identity %s: %w", username, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return acl.Identity{}, fmt.Errorf("add identity %s: %w", username, err)
	} else if n == 0 {
		return acl.Identity{}, fmt.Errorf("identity %s: %w", username, ErrExists)
	}
	s.log.WithFields(logrus.Fields{"username": username, "role": role}).Info("added MQTT identity")
	return acl.Identity{Username: username, Role: role, Created: created}, nil
}

// Identity returns the identity named username, or ErrNotFound.
func (s *Store) Identity(ctx context.Context, username string) (acl.Identity, error) {
	id, err := scanIdentity(s.db.QueryRowContext(ctx, qSelectIdentity, username))
	if errors.Is(err, sql.ErrNoRows) {
		return acl.Identity{}, fmt.Errorf("identity %s: %w", username, ErrNotFound)
	}
	if err != nil {
		return acl.Identity{}, fmt.Errorf("identity %s: %w", username, err)
	}
	return id, nil
}

// ListIdentities returns every identity, ordered by username.
func (s *Store) ListIdentities(ctx context.Context) ([]acl.Identity, error) {
	rows, err := s.db.QueryContext(ctx, qListIdentities)
	if err != nil {
		return nil, fmt.Errorf("list identities: %w", err)
	}
	defer rows.Close()
	var ids []acl.Identity
	for rows.Next() {
		id, err := scanIdentity(rows)
		if err != nil {
			return nil, fmt.Errorf("list identities: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list identities: %w", err)
	}
	return ids, nil
}

// RemoveIdentity deletes the identity and the operator rules that name it
// (so that a later identity of the same name does not inherit them). A
// missing identity gives ErrNotFound.
func (s *Store) RemoveIdentity(ctx context.Context, username string) (err error) {
	defer mapWriteErr(&err)
	defer s.forgetLogin(username)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("remove identity %s: %w", username, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx, qDeleteIdentity, username)
	if err != nil {
		return fmt.Errorf("remove identity %s: %w", username, err)
	}
	if err := mustAffect(res); err != nil {
		return fmt.Errorf("identity %s: %w", username, err)
	}
	if _, err := tx.ExecContext(ctx, qDeleteRulesOfUser, username); err != nil {
		return fmt.Errorf("remove rules of %s: %w", username, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("remove identity %s: %w", username, err)
	}
	s.log.WithField("username", username).Info("removed MQTT identity")
	return nil
}

// SetDisabled disables or re-enables an identity. A disabled identity cannot
// log in and the acl.Policy grants it nothing. Clients already connected keep
// their session until the broker re-checks them.
func (s *Store) SetDisabled(ctx context.Context, username string, disabled bool) (err error) {
	defer mapWriteErr(&err)
	v := 0
	if disabled {
		v = 1
	}
	res, err := s.db.ExecContext(ctx, qUpdateDisabled, username, v)
	if err != nil {
		return fmt.Errorf("set disabled %s: %w", username, err)
	}
	if err := mustAffect(res); err != nil {
		return fmt.Errorf("identity %s: %w", username, err)
	}
	s.log.WithFields(logrus.Fields{"username": username, "disabled": disabled}).Info("changed MQTT identity")
	return nil
}

// SetPassword replaces the password of an identity. Cached logins with the
// old password stop working at once.
func (s *Store) SetPassword(ctx context.Context, username string, password []byte) (err error) {
	defer mapWriteErr(&err)
	hash, bhash, err := s.hashNew(ctx, password)
	if err != nil {
		return fmt.Errorf("identity %s: %w", username, err)
	}
	defer s.forgetLogin(username)
	res, err := s.db.ExecContext(ctx, qUpdatePassword, username, hash, bhash)
	if err != nil {
		return fmt.Errorf("set password %s: %w", username, err)
	}
	if err := mustAffect(res); err != nil {
		return fmt.Errorf("identity %s: %w", username, err)
	}
	s.log.WithField("username", username).Info("changed MQTT password")
	return nil
}

// PasswordHashes returns username -> "$7$..." hash for every identity that
// is not disabled (for a Mosquitto password file).
func (s *Store) PasswordHashes(ctx context.Context) (map[string]string, error) {
	return s.hashes(ctx, qSelectPasswordHashes)
}

// BcryptHashes returns username -> bcrypt hash for every identity that is
// not disabled and whose password was set with a bcrypt hash kept (for
// acl.NATSExport): those from before that, or from a store with a negative
// BcryptCost, are missing.
func (s *Store) BcryptHashes(ctx context.Context) (map[string]string, error) {
	return s.hashes(ctx, qSelectBcryptHashes)
}

func (s *Store) hashes(ctx context.Context, query string) (map[string]string, error) {
	rows, err := s.db.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("password hashes: %w", err)
	}
	defer rows.Close()
	m := make(map[string]string)
	for rows.Next() {
		var u, h string
		if err := rows.Scan(&u, &h); err != nil {
			return nil, fmt.Errorf("password hashes: %w", err)
		}
		m[u] = h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("password hashes: %w", err)
	}
	return m, nil
}

type rowScanner interface{ Scan(dest ...any) error }

func scanIdentity(r rowScanner) (acl.Identity, error) {
	var (
		id       acl.Identity
		role     string
		disabled int64
		ms       int64
	)
	if err := r.Scan(&id.Username, &role, &disabled, &ms); err != nil {
		return acl.Identity{}, err
	}
	id.Role, id.Disabled, id.Created = acl.Role(role), disabled != 0, fromMillis(ms)
	return id, nil
}

// mustAffect turns "no row changed" into ErrNotFound.
func mustAffect(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}
