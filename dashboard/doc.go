// Package dashboard is themisd's web UI (`[ui] listen`, served under the
// same rules as /metrics: plain HTTP on a loopback address only, else
// HTTPS with the token or mTLS). Server-rendered pages, html/template
// escaping every string a guest or a client named, no script but the
// session page's own:
//
//   - /findings: every finding across runs, newest first, filtered by
//     lane, kind, image and status (?lane=ext4&kind=crash&status=new;
//     image=stock, custom, a key or its first 8 characters or more, a
//     kernel version, a flavour, a patch's name): its kind, signature,
//     lanes, image, when first and last seen, how often, status;
//   - /findings/{id}: one finding whole (detail, trace, crash point,
//     kernel report, image) and a form that sets its status
//     (SetFindingStatus: new, reported, fixed-upstream, expected), which
//     the ledger keeps; the form's POST must come from the page's own
//     origin;
//   - /findings/{id}/bundle.tar.gz and, for a crash finding,
//     /findings/{id}/crash.img: the reproducer `themisctl findings
//     export` writes, made by the same Export (runs/export: a crash
//     state replayed in a fresh session) when asked, streamed as it
//     comes: files under ID/ in a gzipped tar, the image's zeros written
//     back. At most MaxExports run at once (a download waits for its
//     turn, with its request); the image is bounded by MaxCrashImage, the
//     files by MaxBundleFiles; a GET another site starts is refused (it
//     would boot a guest); an export that fails once bytes are sent cuts
//     the download off rather than end it short. Dashboard.Close (the
//     daemon's shutdown, before its sessions stop) cancels the exports
//     under way and waits for them;
//   - /sessions: the sessions, running and ended, each linked to its page;
//   - /sessions/{id}: a session and its run: kind and options (the live
//     feed's while this daemon runs it, else its "KIND.started" event's),
//     state, lanes, image, backend, its findings, its progress as rendered
//     and, while the run goes on, live: /static/live.js (embedded, the
//     only script, allowed by that page's Content-Security-Policy alone:
//     script-src 'self'; connect-src 'self') reads
//     /sessions/{id}/events, server-sent events from live.Hub, and sets
//     every value with textContent. A stream gives the last update, each
//     that follows and an "end" event; it ends with the run, the request
//     or the hub (the daemon's shutdown), and live bounds the streams open;
//   - /sessions/{id}/report.html: a finished explore run's HTML report,
//     the page `themisctl report --run ID` writes (Store.RunPage: the
//     daemon makes it of the same messages, runreport/runproto).
//
// It reads through Store, the *session.Manager methods it needs and the
// run page the daemon makes.
package dashboard
