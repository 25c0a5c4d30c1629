// Package jsonout is the one JSON form of themisctl's --json outputs and
// of the files its commands write (shard results, bench reports): an API
// message of package themis.v1 rendered with protojson under the proto
// field names, with one key added in front, "schema", that names the
// message ("themis.v1.ExploreResult"). The package's version is the
// schema's: within themis.v1 fields are only added, never renamed,
// renumbered or retyped (buf lint and the generated-code check guard the
// proto), so a reader of v1 keeps working; a breaking change would be a
// themis.v2 and a new schema name.
//
// Decode is the reader's side: it finds the message the schema names,
// drops the key and decodes the rest strictly with protojson, so an
// unknown field or a wrong type is an error naming it. docs/api.md says
// which message each command prints.
package jsonout
