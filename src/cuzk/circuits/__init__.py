"""Circuits cuzk makes itself: synthetic constraint systems with witnesses, for benchmarks and tests."""
