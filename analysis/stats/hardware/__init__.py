"""Statistics of what the hardware did during a run: utilization, memory, power and energy from the profile's
monitors, per phase and per request."""
