//go:build windows

package process

import (
	"errors"
	"os"
)

// oNoFollow is 0: Windows has no O_NOFOLLOW (the uid range, which uses
// it, is Linux only).
const oNoFollow = 0

// access checks whether this process may use path as want says
// (permRead, permWrite, permSearch, or'ed): read and search by opening
// it, write by its read-only attribute. Windows' access control lists are
// not evaluated beyond that.
func access(path string, want uint32) error {
	if want&(permRead|permSearch) != 0 {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		_ = f.Close()
	}
	if want&permWrite != 0 {
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o200 == 0 {
			return errors.New("read-only")
		}
	}
	return nil
}
