"""Onboarding a site: discovery from its scheduler, the profile and config it writes, and the
doctor that checks a configured site end to end."""
