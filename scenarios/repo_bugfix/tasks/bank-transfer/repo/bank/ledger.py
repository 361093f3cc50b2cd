from .account import Account


def transfer(src: Account, dst: Account, amount: int) -> None:
    """Move `amount` cents from src to dst; nothing changes if src cannot pay."""
    src.withdraw(amount)
    dst.deposit(amount)
