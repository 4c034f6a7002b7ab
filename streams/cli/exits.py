"""The command line's exit codes, one meaning each (docs/running.md lists them)."""

OK = 0
FAILED = 1  # the command ran and the answer is no: no such evaluation, unexpected verdicts
USAGE_OR_CONFIGURATION = 2  # a bad argument or setting, a refused credential or certificate
UNREACHABLE = 3  # a service the command needs does not answer (Kafka)
NOT_READY = 4  # `status`: a worker answers but is not ready

HELP = (
    "exit codes: 0 ok, 1 failed (e.g. nothing found), 2 usage or configuration, "
    "3 Kafka unreachable, 4 a worker not ready (status)"
)
