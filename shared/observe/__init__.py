"""What an operator watches: the metrics' names and labels (``metrics_schema``), the
dashboard's figures (``dashboard``) and OpenTelemetry traces (``otel``)."""
