package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
)

// noJSON are the leaf commands with no --json output of their own
// (docs/api.md says why, under the table).
var noJSON = []string{"session rm", "daemon", "completion bash", "completion zsh", "completion fish", "completion powershell"}

// TestJSONTable: docs/api.md's table of what each command prints with
// --json names real commands (and flags) and real themis.v1 messages, and
// every leaf command is in it or in noJSON.
func TestJSONTable(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## --json: what each command prints\n")
	if !ok {
		t.Fatal(`docs/api.md has no "## --json: what each command prints" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rpcs := themisv1.File_themis_v1_themis_proto.Services().ByName("Themis").Methods() // names of RPCs are not messages
	root := newRoot()
	documented := map[string]bool{}
	code := regexp.MustCompile("`([^`]+)`")
	rows := 0
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		rows++
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			documented[checkCommand(t, root, m[1])] = true
		}
		names := 0
		for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
			if regexp.MustCompile(`^[A-Z][A-Za-z0-9]+$`).MatchString(m[1]) && rpcs.ByName(protoreflect.Name(m[1])) == nil {
				names++
				name := protoreflect.FullName(jsonout.Package + "." + m[1])
				if _, err := protoregistry.GlobalTypes.FindMessageByName(name); err != nil {
					t.Errorf("docs/api.md: %s prints %s, which is not a message: %v", cells[1], name, err)
				}
			}
		}
		if names == 0 {
			t.Errorf("docs/api.md: %s names no message", cells[1])
		}
	}
	if rows < 20 {
		t.Fatalf("docs/api.md's --json table: %d rows read, want every command", rows)
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.HasSubCommands() {
			for _, sub := range c.Commands() {
				walk(sub)
			}
		}
		if path := strings.TrimPrefix(c.CommandPath(), "themisctl "); c.Runnable() && c != root && !c.Hidden && path != "help" &&
			!documented[path] && !slices.Contains(noJSON, path) {
			t.Errorf("%s is not in docs/api.md's --json table (nor in noJSON)", path)
		}
	}
	walk(root)
}

// checkCommand finds the command a table cell names ("replay --passes":
// the command and a flag of it) and returns its path.
func checkCommand(t *testing.T, root *cobra.Command, cell string) string {
	t.Helper()
	var args, flags []string
	for _, w := range strings.Fields(cell) {
		if strings.HasPrefix(w, "--") {
			flags = append(flags, strings.TrimPrefix(w, "--"))
		} else {
			args = append(args, w)
		}
	}
	c, rest, err := root.Find(args)
	if err != nil || len(rest) > 0 || c == root {
		t.Errorf("docs/api.md names %q: not a command (%v, %q left)", cell, err, rest)
		return cell
	}
	for _, f := range flags {
		if c.Flags().Lookup(f) == nil {
			t.Errorf("docs/api.md names %q: %s has no --%s", cell, c.CommandPath(), f)
		}
	}
	if len(flags) > 0 {
		return cell
	}
	return strings.TrimPrefix(c.CommandPath(), "themisctl ")
}
