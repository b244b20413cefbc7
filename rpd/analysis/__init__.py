"""Reading results: simulated time, step-size selection, the paper's theory, labels."""
