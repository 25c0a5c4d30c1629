package api

// Paging limits of the list RPCs (ListSessions, ListFindings) and the
// limit of ListEvents.
const (
	// DefaultPageSize is a list's page_size when the request leaves it 0.
	DefaultPageSize = 100
	// MaxPageSize caps page_size; larger requests are clamped.
	MaxPageSize = 1000
	// DefaultEventLimit is ListEvents' limit when the request leaves it 0.
	DefaultEventLimit = 100
	// MaxEventLimit caps ListEvents' limit; larger requests are clamped.
	MaxEventLimit = 1000
)

// MaxWorkers bounds the workers of an explore run (ExploreRequest.workers,
// CheckRequest.workers; 0 is auto).
const MaxWorkers = 64

// Finding kinds of an explore run's own self-references (Finding.kind;
// the differential's kinds are the op's and the state's).
const (
	KindRemount = "self-reference:remount"
	KindFsck    = "self-reference:fsck"
	// KindLayers: an overlay lane's merged view is not lower ⊕ upper seen
	// from below.
	KindLayers = "self-reference:layers"
	// KindUnreadable: a lane's filesystem refused to read an entry of its
	// own tree (every run checks it).
	KindUnreadable = "unreadable"
	// KindSizeLimit: a lane holds a file larger than its filesystem's
	// family allows (every run checks it).
	KindSizeLimit = "size-limit"
	// KindSeekAnswer: a lane's filesystem answered lseek SEEK_DATA or
	// SEEK_HOLE with an offset lseek(2) rules out (every run checks it,
	// where the walk seeks: files past 64 MiB).
	KindSeekAnswer = "seek-answer"
)

// How a guest was lost: a crash state's verdict (CrashResult.verdict) and
// a corruption's class (CorruptResult.class). The run goes on in a fresh
// session.
const (
	// KernelCrash: the guest's kernel crashed with a report (the result's
	// kernel).
	KernelCrash = "kernel-crash"
	// Hung: the guest gave no answer within the call's bound, and no report.
	Hung = "guest-hung"
	// Died: the guest died without a report.
	Died = "guest-died"
)

// Verdicts of a crash state (CrashResult.verdict), besides the deaths.
const (
	CrashClean  = "clean"
	CrashDirty  = "dirty"
	CrashBroken = "broken" // fsck could not read it (no superblock, ...)
	// CrashNoState is the verdict of a crash run's `only` when the replay's
	// log has no such crash state (it logged other writes).
	CrashNoState = "no-such-state"
	// NotAtBoundary is CrashResult.atomicity of a state equal to no op
	// boundary.
	NotAtBoundary = "none"
)

// ClassNotApplicable is the class (CorruptResult.class) of a sweep target
// naming a structure the lane's filesystem does not have: nothing was
// flipped.
const ClassNotApplicable = "n/a"

// The default profile (ProfileRequest with no ops; the paper's Table 2):
// its ops, and the sizes of the default setup's tree.
var DefaultProfileOps = []string{
	"write f 0 1 0x55", "write f 0 512 0x55", "write f 0 4096 0x55", "write f 0 65536 0x55", "write f 0 1048576 0x55",
	"create g 0644", "mkdir d 0755", "chmod f 0600", "chown f 1000", "link f l", "rename f r", "unlink f",
}

// Sizes of the default profile setup's tree (ProfileRequest's ls_files
// and tree_entries when 0). The paper gives none for ls; for find its text
// breaks off at "a full find over 8".
const (
	DefaultLsFiles     = 8
	DefaultTreeEntries = 8
)

// What a user can say of a finding across runs (SetFindingStatus,
// Finding.status).
const (
	StatusNew           = "new"
	StatusReported      = "reported"
	StatusFixedUpstream = "fixed-upstream"
	StatusExpected      = "expected"
)

// FindingStatuses are the statuses SetFindingStatus takes.
var FindingStatuses = []string{StatusNew, StatusReported, StatusFixedUpstream, StatusExpected}

// StatusOf is a finding's status as a user reads it: StatusNew for one
// stored before findings were counted across runs (no status at all).
func StatusOf(status string) string {
	if status == "" {
		return StatusNew
	}
	return status
}
