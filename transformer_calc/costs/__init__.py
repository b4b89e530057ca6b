"""What a training or serving run costs, computed from the op graph."""
