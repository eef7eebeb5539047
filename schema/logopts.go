package schema

import (
	"fmt"
	"strconv"
)

// Annotations on a pod template that set the limits of its containers'
// logs on the device, overriding the agent's --log-max-size and
// --log-max-files. Changing one restarts the pod (annotations are part
// of its hash).
const (
	// AnnotationLogMaxSize caps each file of a container's log: a
	// quantity of bytes such as "1Mi" or "500Ki".
	AnnotationLogMaxSize = "fleet/log-max-size"
	// AnnotationLogMaxFiles is how many rotated files of a container's log
	// the device keeps besides the live one.
	AnnotationLogMaxFiles = "fleet/log-max-files"
)

// Bounds of the log limits, for annotations and the agent's flags alike.
const (
	MinLogMaxSize  = 16 << 10
	MaxLogMaxSize  = 1 << 30
	MaxLogMaxFiles = 20
)

// LogLimits are the log limits a pod's annotations set; zero fields are
// unset (the device's defaults apply).
type LogLimits struct {
	MaxBytes int64
	MaxFiles int
}

// ParseLogMaxSize reads a log file cap: a quantity ("10Mi") from
// MinLogMaxSize to MaxLogMaxSize bytes.
func ParseLogMaxSize(s string) (int64, error) {
	n, err := ParseMemory(s)
	if err != nil {
		return 0, fmt.Errorf("%q: want a size such as 10Mi: %w", s, err)
	}
	if n < MinLogMaxSize || n > MaxLogMaxSize {
		return 0, fmt.Errorf("%q: want a size from 16Ki to 1Gi", s)
	}
	return n, nil
}

// ParseLogMaxFiles reads a number of rotated log files, from 1 to
// MaxLogMaxFiles.
func ParseLogMaxFiles(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxLogMaxFiles {
		return 0, fmt.Errorf("%q: want a whole number from 1 to %d", s, MaxLogMaxFiles)
	}
	return n, nil
}

// ParseLogLimits reads the log annotations of a pod (or its template).
func ParseLogLimits(annotations map[string]string) (LogLimits, error) {
	var o LogLimits
	var err error
	if s, ok := annotations[AnnotationLogMaxSize]; ok {
		if o.MaxBytes, err = ParseLogMaxSize(s); err != nil {
			return LogLimits{}, fmt.Errorf("annotation %s: %w", AnnotationLogMaxSize, err)
		}
	}
	if s, ok := annotations[AnnotationLogMaxFiles]; ok {
		if o.MaxFiles, err = ParseLogMaxFiles(s); err != nil {
			return LogLimits{}, fmt.Errorf("annotation %s: %w", AnnotationLogMaxFiles, err)
		}
	}
	return o, nil
}

// validateLogLimits adds an error per bad log annotation, naming it:
// field is the annotations' path (spec.template.metadata.annotations).
func validateLogLimits(annotations map[string]string, field string, errs *errList) {
	if s, ok := annotations[AnnotationLogMaxSize]; ok {
		if _, err := ParseLogMaxSize(s); err != nil {
			errs.add(field+"["+AnnotationLogMaxSize+"]", "%v", err)
		}
	}
	if s, ok := annotations[AnnotationLogMaxFiles]; ok {
		if _, err := ParseLogMaxFiles(s); err != nil {
			errs.add(field+"["+AnnotationLogMaxFiles+"]", "%v", err)
		}
	}
}
