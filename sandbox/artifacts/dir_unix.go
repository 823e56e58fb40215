//go:build unix

package artifacts

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// DirSource is a Source that walks a directory on this host, such as a run's
// working directory. It never follows a symbolic link: every folder is
// opened relative to its parent's descriptor with O_NOFOLLOW, every file
// with O_NOFOLLOW|O_NONBLOCK (a FIFO cannot block the walk) and checked with
// fstat to be the regular file that was listed. A program that swaps a file
// for a link while the walk runs gets an error for that file, never the
// link's target.
type DirSource struct {
	Dir string
}

var _ Source = DirSource{}

// Walk implements Source.
func (d DirSource) Walk(visit func(Entry, Opener) error) error {
	fd, err := unix.Open(d.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: d.Dir, Err: err}
	}
	err = walkDir(fd, "", visit)
	if errors.Is(err, SkipDir) {
		err = nil
	}
	return err
}

// walkDir walks the open directory fd (and closes it); prefix is its path
// relative to the top ("" for the top).
func walkDir(fd int, prefix string, visit func(Entry, Opener) error) error {
	dir := os.NewFile(uintptr(fd), prefix)
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("listing %q: %w", displayDir(prefix), err)
	}
	slices.Sort(names)
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed since the listing
			}
			return fmt.Errorf("examining %q: %w", join(prefix, name), err)
		}
		e := Entry{Path: join(prefix, name), Size: st.Size, ModTime: time.Unix(st.Mtim.Unix())}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			e.Type = TypeRegular
			opened := false
			open := func() (io.ReadCloser, error) {
				if opened {
					return nil, errors.New("artifacts: a file can be opened once per visit")
				}
				opened = true
				return openRegular(fd, name, e.Path, &st)
			}
			if err := visit(e, open); err != nil && !errors.Is(err, SkipDir) {
				return err
			}
		case unix.S_IFDIR:
			e.Type, e.Size = TypeDir, 0
			err := visit(e, nil)
			if errors.Is(err, SkipDir) {
				continue
			}
			if err != nil {
				return err
			}
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return fmt.Errorf("opening the folder %q: %w", e.Path, err)
			}
			if err := sameFile(sub, &st); err != nil {
				unix.Close(sub)
				return fmt.Errorf("opening the folder %q: %w", e.Path, err)
			}
			if err := walkDir(sub, e.Path, visit); err != nil {
				return err
			}
		case unix.S_IFLNK:
			e.Type, e.Size = TypeSymlink, 0
			if err := visit(e, nil); err != nil && !errors.Is(err, SkipDir) {
				return err
			}
		default:
			e.Type, e.Size = TypeOther, 0
			if err := visit(e, nil); err != nil && !errors.Is(err, SkipDir) {
				return err
			}
		}
	}
	return nil
}

// openRegular opens name in the directory dirfd without following a link or
// blocking, and checks that it is still the regular file st describes.
func openRegular(dirfd int, name, display string, st *unix.Stat_t) (io.ReadCloser, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %q: %w", display, err)
	}
	if err := sameFile(fd, st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("opening %q: %w", display, err)
	}
	return os.NewFile(uintptr(fd), display), nil
}

// errReplaced: a file changed identity between the listing and the open.
var errReplaced = errors.New("it was replaced while it was being read")

// sameFile checks that fd is the file (or folder) that st describes.
func sameFile(fd int, st *unix.Stat_t) error {
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		return err
	}
	if now.Dev != st.Dev || now.Ino != st.Ino || now.Mode&unix.S_IFMT != st.Mode&unix.S_IFMT {
		return errReplaced
	}
	return nil
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "/" + name
}

func displayDir(prefix string) string {
	if prefix == "" {
		return "."
	}
	return prefix
}
