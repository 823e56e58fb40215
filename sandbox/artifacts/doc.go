// Package artifacts moves files into a run and brings back what the run made.
//
// Files in: a request's files (path, content, encoding) are checked and
// decoded by Decode, which rejects every path that could leave the run's
// working directory, then written by Write into a directory without following
// symbolic links (or packed by Archive into a tar stream, for a container).
//
// Artifacts out: a Snapshot records a run directory before the run (Write
// returns one for the files it wrote); Collect walks the directory after the
// run, again without following symbolic links, and returns the regular files
// that the program created or changed, each with its size, SHA-256 and MIME
// type and a Kind that says how a client should get it: an image, an embedded
// text resource, or a link that a Store serves by URI
// (codeexec://runs/<run id>/<path>). Every cap (files, bytes, entries walked)
// is a parameter, and what a cap left out is listed in the Collection.
//
// A Source is the one small interface between the two ends: DirSource walks a
// directory (process and none modes), TarSource reads a tar stream (docker
// mode, where the run directory lives inside a container).
//
// Nothing here depends on a sandbox mode or on MCP.
package artifacts
