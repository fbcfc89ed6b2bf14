// Package schema declares every document that crosses the process boundary
// between minfer and the programs that drive it: what `minfer bench
// --format json`, `info --json`, `logits --json`, `generate --json` and
// `tokenize --json` print on stdout, and the JSON lines minfer prints on
// stderr at exit ({"launch_census":...}, {"cuda_graphs":...},
// {"op_timing":...}).
//
// minfer writes these types and the harness (abtest, gates, the fake minfer
// of the harness tests) reads minfer only through them, so a field changes
// in one place for writer and reader alike. (The one other document,
// `minfer levers --json`, is the lever registry's own: engine/levers.) The json tags are the wire
// format: committed reports and old result files are parsed with these
// types, so a tag is never renamed, and testdata/ pins each document's field
// set (schema_test.go).
//
// The package imports nothing of the engine: a reader links only the
// documents.
package schema
