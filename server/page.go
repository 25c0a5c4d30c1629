package server

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/themisfs/themis/api"
	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/session"
)

// Paging limits of the list RPCs (ListSessions, ListFindings).
const (
	// DefaultPageSize is a list's page_size when the request leaves it 0.
	DefaultPageSize = api.DefaultPageSize
	// MaxPageSize caps page_size; larger requests are clamped.
	MaxPageSize = api.MaxPageSize
)

// pageTokenPrefix versions the token's format.
const pageTokenPrefix = "p1:"

// pageSize checks and defaults a request's page_size.
func pageSize(n int32) (int, error) {
	switch {
	case n < 0:
		return 0, errkind.Invalid("page_size", "must not be negative, got %d", n)
	case n == 0:
		return DefaultPageSize, nil
	case n > MaxPageSize:
		return MaxPageSize, nil
	}
	return int(n), nil
}

// encodePageToken is the opaque token for the page after key: base64url
// of "p1:<created Unix ns>:<id>".
func encodePageToken(key session.PageKey) string {
	return base64.RawURLEncoding.EncodeToString([]byte(pageTokenPrefix + strconv.FormatInt(key.Created.UnixNano(), 10) + ":" + key.ID))
}

// decodePageToken reads a request's page_token ("": the first page).
func decodePageToken(tok string) (session.PageKey, error) {
	if tok == "" {
		return session.PageKey{}, nil
	}
	bad := errkind.Invalid("page_token", "not a token from this API's next_page_token")
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return session.PageKey{}, bad
	}
	rest, ok := strings.CutPrefix(string(raw), pageTokenPrefix)
	if !ok {
		return session.PageKey{}, bad
	}
	ns, id, ok := strings.Cut(rest, ":")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return session.PageKey{}, bad
	}
	return session.PageKey{Created: time.Unix(0, n).UTC(), ID: id}, nil
}

// pageParams checks a list request's page_size and page_token.
func pageParams(size int32, token string) (int, session.PageKey, error) {
	n, err := pageSize(size)
	if err != nil {
		return 0, session.PageKey{}, err
	}
	key, err := decodePageToken(token)
	return n, key, err
}
