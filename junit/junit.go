package junit

import (
	"encoding/xml"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Finding is what a report needs of a finding.
type Finding struct {
	ID, Kind, Detail, Signature string
	Trace                       []string
	// Lane is the lane a single-lane finding is about ("" for a
	// difference between lanes).
	Lane string
	// Reproduce is the command that shows it again ("": themisctl replay
	// and findings export of ID).
	Reproduce string
}

// Run is one explore run.
type Run struct {
	Name     string   // the suite's name, e.g. "explore ext2,btrfs depth 2 seed 1"
	Lanes    []string // lane names
	Findings []Finding
	Seconds  float64
	// Properties are the run's settings and figures (policy, digest,
	// states, ...), written as <properties>.
	Properties map[string]string
}

// The XML, as the Ant/Jenkins JUnit format has it.
type (
	suites struct {
		XMLName  xml.Name `xml:"testsuites"`
		Tests    int      `xml:"tests,attr"`
		Failures int      `xml:"failures,attr"`
		Errors   int      `xml:"errors,attr"`
		Time     string   `xml:"time,attr"`
		Suites   []suite  `xml:"testsuite"`
	}
	suite struct {
		Name       string      `xml:"name,attr"`
		Tests      int         `xml:"tests,attr"`
		Failures   int         `xml:"failures,attr"`
		Errors     int         `xml:"errors,attr"`
		Skipped    int         `xml:"skipped,attr"`
		Time       string      `xml:"time,attr"`
		Properties *properties `xml:"properties,omitempty"`
		Cases      []testcase  `xml:"testcase"`
	}
	properties struct {
		List []property `xml:"property"`
	}
	property struct {
		Name  string `xml:"name,attr"`
		Value string `xml:"value,attr"`
	}
	testcase struct {
		Name      string   `xml:"name,attr"`
		Classname string   `xml:"classname,attr"`
		Time      string   `xml:"time,attr"`
		Failure   *failure `xml:"failure,omitempty"`
	}
	failure struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Text    string `xml:",chardata"`
	}
)

// Write writes r as a JUnit XML document.
func Write(w io.Writer, r Run) error { return WriteSuites(w, []Run{r}) }

// WriteSuites writes runs as one JUnit XML document, a test suite each
// (themisctl check: one per part).
func WriteSuites(w io.Writer, runs []Run) error {
	doc := suites{}
	var total float64
	for _, r := range runs {
		s := suiteOf(r)
		doc.Suites = append(doc.Suites, s)
		doc.Tests += s.Tests
		doc.Failures += s.Failures
		total += r.Seconds
	}
	doc.Time = seconds(total)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("junit: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// suiteOf is one run's test suite: a case per finding signature, one per
// lane (failing with the findings about that lane alone).
func suiteOf(r Run) suite {
	s := suite{Name: r.Name, Time: seconds(r.Seconds)}
	if len(r.Properties) > 0 {
		s.Properties = &properties{}
		for _, k := range sortedKeys(r.Properties) {
			s.Properties.List = append(s.Properties.List, property{Name: k, Value: r.Properties[k]})
		}
	}
	class := "themis.explore." + strings.Join(r.Lanes, ",")
	for _, g := range bySignature(r.Findings) {
		s.Cases = append(s.Cases, testcase{Name: "finding " + g[0].Signature, Classname: class, Time: "0",
			Failure: &failure{Message: g[0].Detail, Type: g[0].Kind, Text: failureText(g)}})
	}
	for _, lane := range r.Lanes {
		c := testcase{Name: "lane " + lane, Classname: class, Time: "0"}
		var own []Finding
		for _, f := range r.Findings {
			if f.Lane == lane {
				own = append(own, f)
			}
		}
		if len(own) > 0 {
			c.Failure = &failure{Message: fmt.Sprintf("%d finding(s) on lane %s alone", len(own), lane), Type: own[0].Kind, Text: failureText(own)}
		}
		s.Cases = append(s.Cases, c)
	}
	for _, c := range s.Cases {
		if c.Failure != nil {
			s.Failures++
		}
	}
	s.Tests = len(s.Cases)
	return s
}

// bySignature groups findings by signature (a finding without one is its
// own group), in the order their first finding came.
func bySignature(fs []Finding) [][]Finding {
	var out [][]Finding
	at := map[string]int{}
	for _, f := range fs {
		if f.Lane != "" {
			continue // a lane's own: its lane case says it
		}
		key := f.Signature
		if key == "" {
			key = f.Kind + "\x00" + f.ID
		}
		if i, ok := at[key]; ok {
			out[i] = append(out[i], f)
			continue
		}
		at[key] = len(out)
		out = append(out, []Finding{f})
	}
	for _, g := range out {
		if g[0].Signature == "" {
			g[0].Signature = g[0].Kind + " " + g[0].ID
		}
	}
	return out
}

// failureText lists the findings of a case: id, kind, detail and trace.
func failureText(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "%s %s: %s\n", f.ID, f.Kind, f.Detail)
		for i, op := range f.Trace {
			fmt.Fprintf(&b, "  %d  %s\n", i+1, op)
		}
		if f.Reproduce != "" {
			fmt.Fprintf(&b, "  reproduce: %s\n", f.Reproduce)
			continue
		}
		fmt.Fprintf(&b, "  reproduce: themisctl replay %s; themisctl findings export %s\n", f.ID, f.ID)
	}
	return b.String()
}

func seconds(s float64) string { return fmt.Sprintf("%.3f", s) }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
