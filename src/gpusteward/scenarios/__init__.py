"""Scenarios driven through the real tick: the demo (the simulator) and the backtest (a replay)."""
