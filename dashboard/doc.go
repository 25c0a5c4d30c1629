// Package dashboard is themisd's web UI (`[ui] listen`, served under the
// same rules as /metrics: plain HTTP on a loopback address only, else
// HTTPS with the token or mTLS). Server-rendered pages, html/template
// escaping every string a guest or a client named, no script:
//
//   - /findings: every finding across runs, newest first, filtered by
//     lane, kind and status (?lane=ext4&kind=crash&status=new): its kind,
//     signature, lanes, image, when first and last seen, how often, status;
//   - /findings/{id}: one finding whole (detail, trace, crash point,
//     kernel report, image) and a form that sets its status
//     (SetFindingStatus: new, reported, fixed-upstream, expected), which
//     the ledger keeps; the form's POST must come from the page's own
//     origin;
//   - /sessions: the sessions, running and ended.
//
// It reads through Store, the *session.Manager methods it needs.
package dashboard
