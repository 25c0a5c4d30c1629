// Package embedded runs a themisd daemon inside the calling process: the
// CLI's embedded default (a daemon on a private socket that lives as long
// as one command) and `themisctl daemon` (the daemon in the foreground,
// from flags or themisd's TOML). It is the one door from cmd/themisctl to
// the daemon's side: the CLI otherwise speaks only the API, through
// package client (internal/arch enforces it).
package embedded
