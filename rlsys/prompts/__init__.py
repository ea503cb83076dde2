"""Prompt templates (package data) for tools outside the policies, such as the task proposer."""
