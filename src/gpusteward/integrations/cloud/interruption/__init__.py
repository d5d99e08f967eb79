"""Spot and preemption interruption notices: the metadata services of AWS, GCP and Azure, and an
SQS queue of EventBridge events; ``build.build_watch`` puts the configured ones together."""
