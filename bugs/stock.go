package bugs

// Triaged is a stock kernel's finding that docs/hunt.md triages (a real
// bug of the stock kernel, or a documented difference): bench bugs adds
// it to every stock baseline of its filesystem, so that it is never a
// case's detection, even in a run whose own baseline check did not meet
// it (the exFAT stamp comes from timing: a baseline check can miss it
// where a case's check shows it).
type Triaged struct {
	FS  string // the lane filesystem
	Key string // FindingKey or CellKey
	Why string // where docs/hunt.md triages it
}

// TriagedStock are the stock findings docs/hunt.md triages as real bugs
// of the guest kernel.
var TriagedStock = []Triaged{
	{FS: "exfat", Key: CellKey("exfat", "create", "mtime", "diverged"), Why: "docs/hunt.md: exFAT, a new file's mtime reads back 10 ms earlier after a remount"},
	{FS: "exfat", Key: CellKey("exfat", "mkdir", "mtime", "diverged"), Why: "docs/hunt.md: exFAT, a new directory's mtime reads back 10 ms earlier after a remount"},
}

// TriagedKeys are the keys of TriagedStock of filesystem fs.
func TriagedKeys(fs string) []string {
	var out []string
	for _, t := range TriagedStock {
		if t.FS == fs {
			out = append(out, t.Key)
		}
	}
	return out
}
