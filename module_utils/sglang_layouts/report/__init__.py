"""Result records, the comparison report, predicted beside measured."""
