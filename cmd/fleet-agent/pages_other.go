//go:build !linux

package main

import "errors"

func releaseBinaryPages() (int64, error) {
	return 0, errors.New("releasing pages is implemented on Linux only")
}
