"""A failing or leaving rank ends the job instead of hanging it (abort.py, departure.py,
barrier.py); every rank stops at the same step (stop.py) and may requeue the batch job
(requeue.py). Above core/; the session is handed in by the caller."""
