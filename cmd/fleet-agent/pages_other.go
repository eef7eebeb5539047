//go:build !linux

package main

import "errors"

var errNoPages = errors.New("releasing pages is implemented on Linux only")

func releaseBinaryPages() (int64, error) { return 0, errNoPages }

func residentBytes() (int64, error) { return 0, errNoPages }
