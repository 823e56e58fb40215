package approvals

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// A run brings more than its code: its files and its stdin. The code can
// run any of them, whatever their names (bash run.sh, python -m lib,
// import lib, node's require('./data.csv'), which loads any file as
// JavaScript, a program that evaluates its stdin), and some run without
// the code naming them at all (a module that takes the place of a standard
// one, sitecustomize.py, a package in node_modules). So the risk check
// reads every textual file and stdin with the rules of every language, and
// the approver is shown their text; a binary file is described by its
// kind, size and digest, and one that holds code (an executable, bytecode,
// an archive with code in it, or bytes of no known kind) is flagged.

// AssessInputs is the risk check of what a request brings besides its
// code: each file (its name, and its text with the rules of every
// language, or its kind when it is binary) and stdin (which the program
// may evaluate), in that order. Each reason says where, such as
// `in the file "run.sh": network access: runs "curl" (line 2)`.
func AssessInputs(files []artifacts.Input, stdin string) []Finding {
	var out []Finding
	b := &budget{left: inputBudget}
	for _, f := range files {
		where := fmt.Sprintf("in the file %q: ", f.Path)
		for _, h := range hiddenFindings(f.Path) {
			h.Reason = strings.TrimSuffix(h.Reason, " (line 1)")
			out = append(out, prefixed(fmt.Sprintf("in the file name %q: ", f.Path), h))
		}
		if why := runsUnasked(f.Path); why != "" {
			out = append(out, Finding{Category: CategoryUnasked, Reason: where + categoryLabel[CategoryUnasked] + ": " + why})
		}
		kind := describeFile(f.Data)
		switch {
		case kind.text:
			for _, x := range assessText(string(f.Data), b, "python", "javascript", "bash") {
				out = append(out, prefixed(where, x))
			}
		case kind.runs != "":
			out = append(out, Finding{Category: CategoryOpaque, Reason: fmt.Sprintf("%s%s: %s, %s", where, categoryLabel[CategoryOpaque], kind.name, kind.runs)})
		}
	}
	if stdin != "" {
		for _, x := range assessText(stdin, b, "python", "javascript", "bash") {
			out = append(out, prefixed("in stdin: ", x))
		}
	}
	return out
}

func prefixed(where string, f Finding) Finding {
	f.Reason = where + f.Reason
	return f
}

// pythonStandardModules are the top-level modules of python's standard
// library (sys.stdlib_module_names of python 3.11, without the private ones).
var pythonStandardModules = strings.Fields(`abc aifc antigravity argparse array ast asynchat asyncio
asyncore atexit audioop base64 bdb binascii bisect builtins bz2 cProfile calendar cgi cgitb chunk cmath
cmd code codecs codeop collections colorsys compileall concurrent configparser contextlib contextvars
copy copyreg crypt csv ctypes curses dataclasses datetime dbm decimal difflib dis distutils doctest
email encodings ensurepip enum errno faulthandler fcntl filecmp fileinput fnmatch fractions ftplib
functools gc genericpath getopt getpass gettext glob graphlib grp gzip hashlib heapq hmac html http
idlelib imaplib imghdr imp importlib inspect io ipaddress itertools json keyword lib2to3 linecache
locale logging lzma mailbox mailcap marshal math mimetypes mmap modulefinder msilib msvcrt
multiprocessing netrc nis nntplib nt ntpath nturl2path numbers opcode operator optparse os ossaudiodev
pathlib pdb pickle pickletools pipes pkgutil platform plistlib poplib posix posixpath pprint profile
pstats pty pwd py_compile pyclbr pydoc pydoc_data pyexpat queue quopri random re readline reprlib
resource rlcompleter runpy sched secrets select selectors shelve shlex shutil signal site smtpd smtplib
sndhdr socket socketserver spwd sqlite3 sre_compile sre_constants sre_parse ssl stat statistics string
stringprep struct subprocess sunau symtable sys sysconfig syslog tabnanny tarfile telnetlib tempfile
termios textwrap this threading time timeit tkinter token tokenize tomllib trace traceback tracemalloc
tty turtle turtledemo types typing unicodedata unittest urllib uu uuid venv warnings wave weakref
webbrowser winreg winsound wsgiref xdrlib xml xmlrpc zipapp zipfile zipimport zlib zoneinfo`)

// runsUnasked says how the file at p runs without the code naming it
// ("" when it does not).
func runsUnasked(p string) string {
	base := path.Base(p)
	top, _, nested := strings.Cut(p, "/")
	module := strings.TrimSuffix(top, ".py")
	switch {
	case base == "sitecustomize.py" || base == "usercustomize.py":
		return "python imports it when it starts, wherever its folder is on the module path"
	case strings.HasSuffix(base, ".pth"):
		return "python runs its import lines when its folder is a site folder"
	case p == "node_modules" || strings.HasPrefix(p, "node_modules/") || strings.Contains(p, "/node_modules/"):
		return "node loads it in place of the package of that name when the program requires it"
	case p == "package.json":
		return "node reads it to decide how the program and its imports load (its type, imports and exports)"
	case (nested || strings.HasSuffix(top, ".py")) && slices.Contains(pythonStandardModules, module) && pythonFile(p):
		return fmt.Sprintf("takes the place of python's standard module %q wherever the working directory comes first on the module path", module)
	}
	return ""
}

// pythonFile reports whether python can import the file at p.
func pythonFile(p string) bool {
	switch path.Ext(p) {
	case ".py", ".pyc", ".pyw", ".so", ".pyd":
		return true
	}
	return false
}

// fileKind is what describeFile finds a file to be.
type fileKind struct {
	text bool
	// name says what a binary file is, such as "an ELF executable or library".
	name string
	// runs says why a binary file holds code ("" when it holds none).
	runs string
}

// magic are the binary formats describeFile recognises by their first
// bytes (at offset at).
var magic = []struct {
	at   int
	sig  string
	name string
	runs string
}{
	{0, "\x7fELF", "an ELF executable or library", "which the program can run or load"},
	{0, "\xfe\xed\xfa\xce", "a Mach-O executable", "which the program can run or load"},
	{0, "\xce\xfa\xed\xfe", "a Mach-O executable", "which the program can run or load"},
	{0, "\xfe\xed\xfa\xcf", "a Mach-O executable", "which the program can run or load"},
	{0, "\xcf\xfa\xed\xfe", "a Mach-O executable", "which the program can run or load"},
	{0, "\xca\xfe\xba\xbe", "a Java class or Mach-O universal binary", "which the program can run or load"},
	{0, "MZ", "a Windows executable", "which the program can run or load"},
	{0, "\x00asm", "a WebAssembly module", "which node can run"},
	{0, "\x80\x02", "a Python pickle", "which runs code when it is loaded"},
	{0, "\x80\x03", "a Python pickle", "which runs code when it is loaded"},
	{0, "\x80\x04", "a Python pickle", "which runs code when it is loaded"},
	{0, "\x80\x05", "a Python pickle", "which runs code when it is loaded"},
	{0, "\x1f\x8b", "a gzip-compressed file", "which the program can unpack and run"},
	{0, "BZh", "a bzip2-compressed file", "which the program can unpack and run"},
	{0, "\xfd7zXZ\x00", "an xz-compressed file", "which the program can unpack and run"},
	{0, "\x28\xb5\x2f\xfd", "a zstd-compressed file", "which the program can unpack and run"},
	{0, "7z\xbc\xaf\x27\x1c", "a 7-Zip archive", "which the program can unpack and run"},
	{0, "Rar!\x1a\x07", "a RAR archive", "which the program can unpack and run"},
	// Formats that hold data, not code.
	{0, "\x89PNG\r\n\x1a\n", "a PNG image", ""},
	{0, "\xff\xd8\xff", "a JPEG image", ""},
	{0, "GIF8", "a GIF image", ""},
	{8, "WEBP", "a WebP image", ""},
	{0, "II*\x00", "a TIFF image", ""},
	{0, "MM\x00*", "a TIFF image", ""},
	{0, "%PDF-", "a PDF document", ""},
	{0, "SQLite format 3\x00", "an SQLite database", ""},
	{0, "PAR1", "a Parquet file", ""},
	{0, "\x93NUMPY", "a NumPy array", ""},
	{0, "\x89HDF\r\n\x1a\n", "an HDF5 file", ""},
	{0, "ARROW1", "an Arrow file", ""},
	{0, "\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an OLE document (an old Office file)", ""},
	{0, "OggS", "an Ogg media file", ""},
	{0, "fLaC", "a FLAC audio file", ""},
	{0, "ID3", "an MP3 audio file", ""},
	{8, "WAVE", "a WAV audio file", ""},
	{4, "ftyp", "an MP4 media file", ""},
}

// codeExtensions are the extensions of files in an archive that hold code.
var codeExtensions = strings.Fields(`.py .pyc .pyo .pyw .pyd .pth .so .dll .dylib .exe .js .mjs .cjs .node .wasm
.sh .bash .zsh .pl .rb .php .class .jar .whl .egg .zip .tar .gz .tgz .bz2 .xz .zst .7z .rar`)

// describeFile says what data is: text (valid UTF-8 without NUL), a known
// binary format, or binary data of no known kind, which counts as code (a
// script of bash or node in another encoding, or anything else).
func describeFile(data []byte) fileKind {
	if utf8.Valid(data) && bytes.IndexByte(data, 0) < 0 {
		return fileKind{text: true}
	}
	if bytes.HasPrefix(data, []byte("PK\x03\x04")) || bytes.HasPrefix(data, []byte("PK\x05\x06")) {
		return describeArchive("a zip archive", data, func() ([]string, error) {
			z, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				return nil, err
			}
			var names []string
			for _, f := range z.File {
				names = append(names, f.Name)
			}
			return names, nil
		})
	}
	if len(data) > 262 && string(data[257:262]) == "ustar" {
		return describeArchive("a tar archive", data, func() ([]string, error) {
			var names []string
			tr := tar.NewReader(bytes.NewReader(data))
			for {
				h, err := tr.Next()
				if err == io.EOF {
					return names, nil
				}
				if err != nil {
					return nil, err
				}
				names = append(names, h.Name)
			}
		})
	}
	if len(data) >= 4 && data[2] == '\r' && data[3] == '\n' && data[1] >= 0x0b && data[1] <= 0x0f {
		return fileKind{name: "Python bytecode", runs: "which python can run or import"}
	}
	for _, m := range magic {
		if len(data) >= m.at+len(m.sig) && string(data[m.at:m.at+len(m.sig)]) == m.sig {
			return fileKind{name: m.name, runs: m.runs}
		}
	}
	return fileKind{name: "binary data of no known kind", runs: "which the program can still run (bash and node run any file as a script)"}
}

// describeArchive describes an archive whose member names list gives: it
// holds code when a member's name says so (or when it cannot be listed).
func describeArchive(what string, data []byte, list func() ([]string, error)) fileKind {
	names, err := list()
	if err != nil {
		return fileKind{name: what + " that cannot be listed", runs: "which the program can unpack and run"}
	}
	k := fileKind{name: fmt.Sprintf("%s of %d files", what, len(names))}
	for _, n := range names {
		if path.Base(n) == "__main__.py" || slices.Contains(codeExtensions, strings.ToLower(path.Ext(n))) {
			k.runs = fmt.Sprintf("among them %q, which the program can unpack and run (python runs a zip archive, and imports from one)", n)
			break
		}
	}
	return k
}

// askFiles describes a request's files for the person approving it: the
// text of each textual file, and the kind of each binary one.
func askFiles(files []artifacts.Input) []AskFile {
	var out []AskFile
	for _, f := range files {
		sum := sha256.Sum256(f.Data)
		af := AskFile{Path: f.Path, Size: len(f.Data), SHA256: hex.EncodeToString(sum[:])}
		if k := describeFile(f.Data); k.text {
			af.Text = string(f.Data)
		} else {
			af.Binary, af.Kind = true, k.name
		}
		out = append(out, af)
	}
	return out
}
