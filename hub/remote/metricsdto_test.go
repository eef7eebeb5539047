package remote

import dto "github.com/prometheus/client_model/go"

type dtoMetric = dto.Metric

type prometheusCounter interface{ Write(*dto.Metric) error }
