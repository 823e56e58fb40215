package artifacts

import (
	"archive/tar"
	"fmt"
	"io"
	"path"
	"time"
)

// Archive writes inputs (from Decode) to w as a tar stream, with the
// folders their paths need before them, owned by uid:gid, with modification
// time mtime: what a container unpacks into its run directory. It writes
// nothing but plain folders and regular files.
func Archive(w io.Writer, inputs []Input, uid, gid int, mtime time.Time) error {
	tw := tar.NewWriter(w)
	made := make(map[string]bool)
	var mkdirs func(dir string) error
	mkdirs = func(dir string) error {
		if dir == "." || made[dir] {
			return nil
		}
		if err := mkdirs(path.Dir(dir)); err != nil {
			return err
		}
		made[dir] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: dirMode, Uid: uid, Gid: gid, ModTime: mtime, Format: tar.FormatPAX})
	}
	for _, in := range inputs {
		if err := mkdirs(path.Dir(in.Path)); err != nil {
			return fmt.Errorf("archiving the files: %w", err)
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: in.Path, Size: int64(len(in.Data)), Mode: fileMode, Uid: uid, Gid: gid, ModTime: mtime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("archiving the files: %w", err)
		}
		if _, err := tw.Write(in.Data); err != nil {
			return fmt.Errorf("archiving the files: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("archiving the files: %w", err)
	}
	return nil
}
