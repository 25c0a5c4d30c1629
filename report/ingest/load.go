package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/themisfs/themis/api/jsonout"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/report"
)

// MaxInput bounds what Load reads of one file, in bytes.
const MaxInput = 64 << 20

// Load errors, wrapped with the path Load was given.
var (
	// ErrNoFiles: a directory holds no .json or .jsonl file.
	ErrNoFiles = errors.New("no .json or .jsonl files")
	// ErrNoData: the files hold no layout, profile row or corruption result.
	ErrNoData = errors.New("no report, profile or corruption data")
)

// Load reads saved results from a file or from every *.json and *.jsonl
// file of a directory (see the package doc for what they may hold) into
// one Report.
func Load(path string) (*report.Report, error) {
	files, err := inputFiles(path)
	if err != nil {
		return nil, err
	}
	r := &report.Report{}
	for _, f := range files {
		if err := loadFile(f, r); err != nil {
			return nil, err
		}
	}
	r.AddWrittenLayouts()
	if len(r.Layouts) == 0 && len(r.Profile) == 0 && len(r.Blast) == 0 {
		return nil, fmt.Errorf("%s: %w", path, ErrNoData)
	}
	return r, nil
}

// inputFiles is path itself, or a directory's .json and .jsonl regular
// files in name order.
func inputFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range ents {
		if e.Type().IsRegular() && (strings.HasSuffix(e.Name(), ".json") || strings.HasSuffix(e.Name(), ".jsonl")) {
			files = append(files, filepath.Join(path, e.Name()))
		}
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: %w", path, ErrNoFiles)
	}
	return files, nil
}

// loadFile adds every JSON value of one file to r.
func loadFile(name string, r *report.Report) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := json.NewDecoder(io.LimitReader(f, MaxInput))
	for i := 1; ; i++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: value %d: %w", name, i, err)
		}
		if err := addValue(raw, r); err != nil {
			return fmt.Errorf("%s: value %d: %w", name, i, err)
		}
	}
}

// keySet is the top-level keys of a JSON object.
type keySet map[string]json.RawMessage

func (k keySet) has(names ...string) bool {
	for _, n := range names {
		if _, ok := k[n]; ok {
			return true
		}
	}
	return false
}

// discard decodes protojson, ignoring fields this build does not know.
var discard = protojson.UnmarshalOptions{DiscardUnknown: true}

// addValue tells one saved value's kind by its keys and adds it to r.
func addValue(raw json.RawMessage, r *report.Report) error {
	var keys keySet
	if err := json.Unmarshal(raw, &keys); err != nil {
		return fmt.Errorf("want a JSON object: %w", err)
	}
	switch {
	case keys.has(jsonout.SchemaKey) && bytes.Equal(keys[jsonout.SchemaKey], pageSchema):
		return addPage(raw, r)
	case keys.has("row", "result", "summary"):
		if keys.has("row") || keys.has("summary") && bytes.Contains(keys["summary"], []byte(`"layouts"`)) {
			return addProfileMessage(raw, r)
		}
		return addCorruptMessage(raw, r)
	case keys.has("target"):
		var c themisv1.CorruptResult
		if err := discard.Unmarshal(raw, &c); err != nil {
			return err
		}
		r.Blast = append(r.Blast, BlastResult(&c))
	case keys.has("op"):
		var p themisv1.ProfileRow
		if err := discard.Unmarshal(raw, &p); err != nil {
			return err
		}
		r.Profile = append(r.Profile, ProfileRow(&p))
	case keys.has("layouts", "profile", "blast", "title", "note"):
		return addSaved(raw, r)
	default:
		return errors.New("not a report, profile row or corruption result")
	}
	return nil
}

// addProfileMessage adds a Profile stream message: a row, or the
// summary's layouts.
func addProfileMessage(raw json.RawMessage, r *report.Report) error {
	var p themisv1.ProfileResponse
	if err := discard.Unmarshal(raw, &p); err != nil {
		return err
	}
	if row := p.GetRow(); row != nil {
		r.Profile = append(r.Profile, ProfileRow(row))
	}
	for _, l := range p.GetSummary().GetLayouts() {
		r.Layouts = append(r.Layouts, Layout(l))
	}
	return nil
}

// addCorruptMessage adds a Corrupt stream message's result (a summary adds
// nothing).
func addCorruptMessage(raw json.RawMessage, r *report.Report) error {
	var c themisv1.CorruptResponse
	if err := discard.Unmarshal(raw, &c); err != nil {
		return err
	}
	if res := c.GetResult(); res != nil {
		r.Blast = append(r.Blast, BlastResult(res))
	}
	return nil
}

// pageSchema is the schema key's value in `themisctl --json report`'s
// output.
var pageSchema = []byte(`"` + string((&themisv1.ReportPage{}).ProtoReflect().Descriptor().FullName()) + `"`)

// addPage adds a page's data as `themisctl --json report` prints it
// (jsonout, strictly): its parts appended, the first title kept, the
// notes joined.
func addPage(raw json.RawMessage, r *report.Report) error {
	var p themisv1.ReportPage
	if err := jsonout.DecodeInto(raw, &p); err != nil {
		return fmt.Errorf("a report's JSON: %w", err)
	}
	merge(r, FromPage(&p))
	return nil
}

// addSaved adds a report's data in report.Report's own JSON (the
// hand-made samples of report/testdata): its parts appended, the first title
// kept, the notes joined.
func addSaved(raw json.RawMessage, r *report.Report) error {
	var saved report.Report
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&saved); err != nil {
		return fmt.Errorf("a report's JSON: %w", err)
	}
	merge(r, &saved)
	return nil
}

// merge adds saved's parts to r, keeping r's title if it has one and
// joining the notes.
func merge(r, saved *report.Report) {
	if r.Title == "" {
		r.Title = saved.Title
	}
	r.Note = strings.TrimSpace(r.Note + " " + saved.Note)
	r.Layouts = append(r.Layouts, saved.Layouts...)
	r.Profile = append(r.Profile, saved.Profile...)
	r.Blast = append(r.Blast, saved.Blast...)
}
