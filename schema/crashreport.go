package schema

// ValidateCrashReport checks a CrashReport payload as the hub receives it
// on a device's crashreports topic.
func ValidateCrashReport(c *CrashReport) error {
	var errs errList
	if err := ValidateName(c.Device); err != nil {
		errs.add("device", "%v", err)
	}
	if c.Pod == "" {
		errs.add("pod", "required")
	} else if len(c.Pod) > 253 {
		errs.add("pod", "at most 253 characters")
	}
	if c.Container == "" {
		errs.add("container", "required")
	} else if len(c.Container) > 253 {
		errs.add("container", "at most 253 characters")
	}
	if c.Time.IsZero() || c.Time.Year() > 9999 {
		errs.add("time", "required: an RFC 3339 time")
	}
	if c.Reason == "" {
		errs.add("reason", "required")
	}
	if len(c.Message) > 4096 {
		errs.add("message", "at most 4096 characters")
	}
	if c.LogTail == "" {
		errs.add("logTail", "required")
	} else if len(c.LogTail) > MaxCrashLogBytes {
		errs.add("logTail", "at most %d bytes", MaxCrashLogBytes)
	}
	return errs.err("CrashReport", c.Device)
}

// CrashReportOf returns the crash report an event from an agent before
// the crashreports topic carried in its LogTail (false if none): the
// event must be about a container.
func CrashReportOf(ev *Event) (CrashReport, bool) {
	if ev.LogTail == "" || ev.Pod == "" || ev.Container == "" {
		return CrashReport{}, false
	}
	return CrashReport{
		Device: ev.Device, Pod: ev.Pod, Container: ev.Container, Time: ev.Time,
		Reason: ev.Reason, Message: ev.Message, ExitCode: ev.ExitCode, LogTail: ev.LogTail,
	}, true
}
