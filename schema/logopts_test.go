package schema

import (
	"errors"
	"strings"
	"testing"
)

func TestParseLogLimits(t *testing.T) {
	tests := []struct {
		ann  map[string]string
		want LogLimits
		err  string // in the error; "" for none
	}{
		{nil, LogLimits{}, ""},
		{map[string]string{"other": "x"}, LogLimits{}, ""},
		{map[string]string{AnnotationLogMaxSize: "1Mi", AnnotationLogMaxFiles: "2"}, LogLimits{1 << 20, 2}, ""},
		{map[string]string{AnnotationLogMaxSize: "500Ki"}, LogLimits{MaxBytes: 500 << 10}, ""},
		{map[string]string{AnnotationLogMaxSize: "lots"}, LogLimits{}, "annotation fleet/log-max-size: \"lots\""},
		{map[string]string{AnnotationLogMaxSize: "1Ki"}, LogLimits{}, "from 16Ki to 1Gi"},
		{map[string]string{AnnotationLogMaxSize: "2Gi"}, LogLimits{}, "from 16Ki to 1Gi"},
		{map[string]string{AnnotationLogMaxFiles: "0"}, LogLimits{}, "annotation fleet/log-max-files: \"0\": want a whole number from 1 to 20"},
		{map[string]string{AnnotationLogMaxFiles: "2.5"}, LogLimits{}, "whole number"},
	}
	for _, tt := range tests {
		got, err := ParseLogLimits(tt.ann)
		if tt.err == "" && (err != nil || got != tt.want) {
			t.Errorf("ParseLogLimits(%v) = %+v, %v; want %+v", tt.ann, got, err, tt.want)
		}
		if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("ParseLogLimits(%v) error %v, want one with %q", tt.ann, err, tt.err)
		}
	}
}

func TestValidateDeploymentLogAnnotations(t *testing.T) {
	d := &Deployment{
		TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: KindDeployment},
		Metadata: ObjectMeta{Name: "web"},
		Spec: DeploymentSpec{
			Template: PodTemplate{
				Metadata: &TemplateMeta{Annotations: map[string]string{AnnotationLogMaxSize: "1Mi", AnnotationLogMaxFiles: "3"}},
				Spec:     PodSpec{Containers: []Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}
	if err := ValidateDeployment(d); err != nil {
		t.Fatalf("valid log annotations refused: %v", err)
	}
	d.Spec.Template.Metadata.Annotations = map[string]string{AnnotationLogMaxSize: "10MB!", AnnotationLogMaxFiles: "100"}
	err := ValidateDeployment(d)
	var ve *ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) || len(ve.Errors) != 2 {
		t.Fatalf("err = %v, want two field errors", err)
	}
	for i, field := range []string{
		"spec.template.metadata.annotations[fleet/log-max-size]",
		"spec.template.metadata.annotations[fleet/log-max-files]",
	} {
		if ve.Errors[i].Field != field {
			t.Errorf("error %d on %q, want %q (%v)", i, ve.Errors[i].Field, field, err)
		}
	}
}
