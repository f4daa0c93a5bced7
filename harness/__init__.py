"""Load generation: profiles, the open-loop Poisson schedule, the Locust user, recording and orchestration."""
