"""`tpu-perf doctor`: checks that this environment can record, trace and compile for TPUs."""

from tpu_perf.doctor.checks import Check, Diagnosis, DoctorOptions, diagnose

__all__ = ["Check", "Diagnosis", "DoctorOptions", "diagnose"]
