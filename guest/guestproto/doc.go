// Package guestproto is the guest images as the API names them: a
// guest.Ref as a themis.v1 GuestImage (what a session booted, what a
// finding ran on), an image in the cache as `themisctl --json guest build`
// and `guest list` print it. Apart from package guest, which the session
// manager imports and which must not reach the API's grpc code
// (internal/arch).
package guestproto
