// Package budget accounts the host bytes a session keeps (its overlay
// layers, the file content kept for RestoreFile, the RAM copies of its
// checkpoints) against its own limit and, through a parent, against the
// daemon's.
//
// A Budget counts bytes by kind ("overlay", "kept content", "checkpoint
// RAM"). A charge is all or nothing along the chain: it is refused when the
// Budget or any ancestor would go past its limit, and the refusal is an
// *ExhaustedError (wrapping ErrExhausted) that names the budget that ran
// out, the kind that asked, how much, the usage by kind and the config key
// of the limit. Release gives bytes back; Close gives back everything a
// Budget holds to its ancestors.
//
// An Account is a Budget bound to one kind for a holder that cannot return
// the refusal to whoever must see it: an overlay's write is refused under
// an NBD or virtio request, so the guest sees an I/O error and the session
// sees nothing. An Account's refusals are kept, and Refused hands the first
// one to the session, which then fails the call that observes it.
//
// All methods are safe for concurrent use. Lock order: a Budget's mutex,
// then its parent's. budget is a leaf package.
package budget
